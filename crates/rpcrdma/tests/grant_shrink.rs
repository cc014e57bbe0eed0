//! Review 3 (H1): a responder may lower its credit grant (RFC 8166 §3.3.1).
//! A call whose reply never came keeps its credit; if a later reply lowers
//! the grant to what such calls already hold, no call can ever be sent
//! again on that connection. The requester must treat that as a major
//! timeout and reconnect, not leave every later call to time out in its
//! queue.
//!
//! Review 3 (H3): calls given up keep their registered buffers while their
//! replies are outstanding; beyond `RdmaConfig::max_abandoned_bytes` the
//! requester treats the connection as failed.
//!
//! The responder here is a stand-in written with raw verbs over the software
//! iWARP provider, answering NULL replies (whatever the procedure) with the
//! grant its policy gives, or not at all.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rdma_verbs::{
    Access, CompletionQueue, ConnParam, ConnectRequest, Device as _, Listener, MemoryRegion,
    MrBuffer, ProtectionDomain, QpInit, QueuePair, RecvWr, SendWr, Sge, WcOpcode,
};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig};

/// RPC-over-RDMA header (RDMA_MSG, empty chunk lists) and an RPC reply
/// (MSG_ACCEPTED, AUTH_NONE, SUCCESS) of a NULL call.
fn null_reply(xid: u32, grant: u32) -> Bytes {
    let words = [xid, 1, grant, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0];
    Bytes::from(
        words
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect::<Vec<u8>>(),
    )
}

/// Which calls are answered, with what grant: `policy(first connection,
/// call number from 1)`; `None` leaves the call unanswered.
type Policy = fn(bool, u32) -> Option<u32>;

/// Serves one connection.
async fn serve(req: iwarp::device::ConnRequest, dev: iwarp::Device, first: bool, policy: Policy) {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = dev.create_qp(&pd, QpInit::with_cq(cq.clone())).unwrap();
    let mut recvs = std::collections::HashMap::new();
    for i in 0..64u64 {
        let mr = pd
            .register(
                MrBuffer::Mutable(BytesMut::zeroed(4096)),
                Access::LOCAL_WRITE,
            )
            .unwrap();
        qp.post_recv(RecvWr::new(i, vec![Sge::new(mr.lkey(), 0, 4096)]))
            .unwrap();
        recvs.insert(i, mr);
    }
    let pdata = RdmaConfig::default().private_data().encode();
    if req
        .accept(&qp, ConnParam::new(Bytes::copy_from_slice(&pdata), 4, 4))
        .await
        .is_err()
    {
        return;
    }
    let mut n = 0u32;
    let mut sent = Vec::new();
    loop {
        let wc = cq.next().await;
        if wc.opcode != WcOpcode::Recv {
            continue;
        }
        if !wc.is_success() {
            return; // flushed: the connection ended
        }
        let Some(mr) = recvs.remove(&wc.wr_id) else {
            continue;
        };
        let b = mr.deregister().unwrap().into_bytes();
        let xid = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        n += 1;
        let Some(grant) = policy(first, n) else {
            continue; // never answered
        };
        let reply = null_reply(xid, grant);
        let len = reply.len() as u32;
        let smr = pd.register(MrBuffer::Frozen(reply), Access::NONE).unwrap();
        if qp
            .post_send(SendWr::send(
                u64::from(n),
                vec![Sge::new(smr.lkey(), 0, len)],
            ))
            .is_err()
        {
            return;
        }
        sent.push(smr);
    }
}

/// A stand-in responder on loopback and a client of it.
async fn pair(policy: Policy, cfg: RdmaConfig) -> RdmaClient<iwarp::Device> {
    let dev = iwarp::Device::default();
    let listener = dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok(req) = listener.next_request().await {
            tokio::spawn(serve(req, dev.clone(), first, policy));
            first = false;
        }
    });
    RdmaClient::connect(iwarp::Device::default(), addr, cfg, Bindings::rdmatest())
        .await
        .unwrap()
}

/// H1: on its first connection the responder grants 2, ignores the second
/// call, and answers later ones with a grant of 1; on later connections it
/// answers every call with a grant of 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_grant_with_a_lost_reply_outstanding_reconnects() {
    let policy: Policy = |first, n| match (first, n) {
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

/// H3: the responder grants 32 with its first reply and never answers
/// again. Each GET given up keeps its 2 MiB Write chunk registered; the
/// second one takes the given-up calls past a 3 MiB budget, and the client
/// reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_buffers_beyond_the_budget_reconnect() {
    let policy: Policy = |first, n| (first && n == 1).then_some(32);
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
