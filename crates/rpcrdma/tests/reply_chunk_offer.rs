//! When the requester offers a Reply chunk without an Upper-Layer Binding,
//! and what it reports about remote invalidation, against a stand-in
//! responder that behaves as Linux's svcrdma does: it advertises R = 0 in
//! its RFC 8797 private data and still answers by Send with Invalidate.
//!
//! The rule (RFC 8166 §3.5.3 leaves it to the requester): a Reply chunk is
//! offered only when the reply may exceed the reply inline threshold. A
//! NULL procedure (0) has a void result; otherwise the binding's estimate
//! bounds the reply, or the request's `max_reply_len`, or, when neither
//! exists, `RdmaConfig::default_max_reply`.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use common::stand_in;
use oncrpc::{Payload, Request};
use rdma_verbs::{Device, Listener, QueuePair, SendWr, Sge};
use rdma_verbs::{MemoryRegion, MrBuffer, ProtectionDomain};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig};
use rpcrdma_proto::private_data::PrivateData;
use tokio::sync::mpsc;

/// NFS (RFC 1813): a program with no binding in `Bindings::new()`.
const PROG: u32 = 100_003;
const VERS: u32 = 3;

/// What the stand-in saw in one call's transport header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    procedure: u32,
    /// Total length of the offered Reply chunk, `None` when absent.
    reply_chunk: Option<u64>,
}

fn word(b: &[u8], i: usize) -> u32 {
    b.get(i * 4..i * 4 + 4)
        .map_or(u32::MAX, |x| u32::from_be_bytes(x.try_into().unwrap()))
}

/// Parses an RDMA_MSG call with an empty Read list and Write list; returns
/// the Reply chunk (total length, first handle) and the header length.
fn reply_chunk(b: &[u8]) -> (Option<(u64, u32)>, usize) {
    assert_eq!(word(b, 3), 0, "RDMA_MSG");
    assert_eq!(word(b, 4), 0, "no Read list");
    assert_eq!(word(b, 5), 0, "no Write list");
    if word(b, 6) == 0 {
        return (None, 7 * 4);
    }
    let n = word(b, 7) as usize;
    let mut total = 0u64;
    for s in 0..n {
        total += u64::from(word(b, 8 + s * 4 + 1));
    }
    (Some((total, word(b, 8))), (8 + n * 4) * 4)
}

/// A Linux-like stand-in: R = 0, replies to every call with an accepted
/// SUCCESS reply carrying no results, by Send with Invalidate of the
/// offered Reply chunk's STag when there is one, by Send otherwise.
async fn linux_like() -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let dev = iwarp::Device::default();
    let listener = dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(req) = listener.next_request().await {
            let tx = tx.clone();
            let pdata = PrivateData {
                remote_invalidation: false,
                send_size: 4096,
                recv_size: 4096,
            }
            .encode();
            tokio::spawn(stand_in::serve_with(
                req,
                dev.clone(),
                Bytes::copy_from_slice(&pdata),
                4096,
                move |b, pd, qp| {
                    let (xid, credits) = (word(b, 0), word(b, 2));
                    let (rc, hlen) = reply_chunk(b);
                    let procedure = word(b, hlen / 4 + 5);
                    let _ = tx.send(Seen {
                        procedure,
                        reply_chunk: rc.map(|(len, _)| len),
                    });
                    let reply = stand_in::words(&[xid, 1, credits, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0]);
                    let len = reply.len() as u32;
                    let mr = pd
                        .register(MrBuffer::Frozen(reply), rdma_verbs::Access::NONE)
                        .unwrap();
                    let sge = vec![Sge::new(mr.lkey(), 0, len)];
                    let wr = match rc {
                        Some((_, handle)) => SendWr::send_with_invalidate(1, sge, handle),
                        None => SendWr::send(1, sge),
                    };
                    qp.post_send(wr).ok()?;
                    Some(vec![mr])
                },
            ));
        }
    });
    (addr, rx)
}

async fn client(addr: SocketAddr) -> RdmaClient<iwarp::Device> {
    RdmaClient::connect(
        iwarp::Device::default(),
        addr,
        RdmaConfig::default(),
        Bindings::new(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn null_without_binding_offers_no_reply_chunk() {
    let (addr, mut seen) = linux_like().await;
    let c = client(addr).await;
    let (_, report) = c
        .call_with_report(Request::new(PROG, VERS, 0, Payload::new()))
        .await
        .unwrap();
    assert_eq!(
        seen.recv().await,
        Some(Seen {
            procedure: 0,
            reply_chunk: None
        })
    );
    assert!(!report.reply_chunk_offered, "{report}");
    c.close();
}

#[tokio::test]
async fn max_reply_len_decides_without_binding() {
    let (addr, mut seen) = linux_like().await;
    let c = client(addr).await;
    // Fits the 4 KiB reply inline threshold: no Reply chunk.
    let small = Request::new(PROG, VERS, 1, Payload::new()).with_max_reply_len(200);
    c.call_with_report(small).await.unwrap();
    assert_eq!(seen.recv().await.unwrap().reply_chunk, None);
    // May exceed it: a Reply chunk of that size (rounded up to XDR units).
    let big = Request::new(PROG, VERS, 1, Payload::new()).with_max_reply_len(100_001);
    c.call_with_report(big).await.unwrap();
    assert_eq!(seen.recv().await.unwrap().reply_chunk, Some(100_004));
    c.close();
}

#[tokio::test]
async fn unbounded_reply_gets_the_default_reply_chunk() {
    let (addr, mut seen) = linux_like().await;
    let c = client(addr).await;
    c.call_with_report(Request::new(PROG, VERS, 1, Payload::new()))
        .await
        .unwrap();
    let want = u64::from(RdmaConfig::default().default_max_reply);
    assert_eq!(seen.recv().await.unwrap().reply_chunk, Some(want));
    c.close();
}

/// Linux's server advertises R = 0 and still sends Send with Invalidate:
/// what decides whether this requester takes it is its own R bit.
#[tokio::test]
async fn send_with_invalidate_from_a_server_that_advertised_r_0() {
    let (addr, mut seen) = linux_like().await;
    let c = client(addr).await;
    assert_eq!(c.remote_invalidation(), Some(false));
    assert_eq!(c.accepts_remote_invalidation(), Some(true));
    let (_, report) = c
        .call_with_report(Request::new(PROG, VERS, 1, Payload::new()))
        .await
        .unwrap();
    assert!(seen.recv().await.unwrap().reply_chunk.is_some());
    assert!(report.remote_invalidated, "{report}");
    assert_eq!(c.stats().remote_invalidations.load(Relaxed), 1);
    c.close();
}
